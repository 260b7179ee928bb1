"""Cart totals: items, discount, shipping and VAT."""

from shop import config


class Cart:
    def __init__(self, region="DE"):
        self.items = []
        self.settings = config.Settings(region)
        self.coupon = None

    def add(self, sku, price, qty=1):
        self.items.append({"sku": sku, "price": price, "qty": qty})

    def subtotal(self):
        return sum(i["price"] * i["qty"] for i in self.items)

    def discount(self):
        if self.coupon is None:
            return 0.0
        return round(self.subtotal() * self.settings.discount_rate, 2)

    def shipping(self):
        if self.subtotal() > config.FREE_SHIPPING_OVER:
            return 0.0
        return config.SHIPPING_FLAT

    def total(self):
        net = self.subtotal() - self.discount() + self.shipping()
        return round(net * (1 + self.settings.vat_rate), 2)


def parse_price(text):
    amount, currency = text.split(" ")
    if currency != config.CURRENCY:
        raise ValueError(f"unsupported currency {currency!r}")
    return float(amount.replace(",", "."))
