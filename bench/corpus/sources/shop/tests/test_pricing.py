import pytest
from shop.pricing import Cart, parse_price


def make_cart(region="DE"):
    cart = Cart(region)
    cart.add("book-001", 12.5, 2)
    cart.add("pen-007", 1.2, 5)
    return cart


def test_subtotal():
    assert make_cart().subtotal() == 31.0


def test_shipping_below_threshold():
    assert make_cart().shipping() == 4.95


def test_total_without_coupon():
    assert make_cart().total() == round((31.0 + 4.95) * 1.19, 2)


def test_discount_applies_with_coupon():
    cart = make_cart()
    cart.coupon = "WELCOME15"
    assert cart.discount() == 4.65


def test_total_with_coupon_fr():
    cart = make_cart("FR")
    cart.coupon = "WELCOME15"
    assert cart.total() == round((31.0 - 4.65 + 4.95) * 1.20, 2)


@pytest.mark.parametrize("text,value", [("3,50 EUR", 3.5), ("10 EUR", 10.0), ("7.25 USD", 7.25)])
def test_parse_price(text, value):
    assert parse_price(text) == value


def test_free_shipping_over_threshold():
    cart = Cart()
    cart.add("lamp-3", 61.0)
    assert cart.shipping() == 0.0
