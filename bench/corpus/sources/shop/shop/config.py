"""Settings the pricing rules read."""

CURRENCY = "EUR"
DISCOUNT_RATE = 0.15
FREE_SHIPPING_OVER = 60.0
SHIPPING_FLAT = 4.95
VAT = {"DE": 0.19, "FR": 0.20, "NL": 0.21}


class Settings:
    def __init__(self, region: str = "DE"):
        self.region = region
        self.vat_rate = VAT[region]
