"""Builds a usage report from nested records; fails deep inside with a chained exception."""

import json

RECORDS = [
    {"user": f"u{i}", "usage": {"tokens": i * 10, "quota": None if i == 7 else 1000}}
    for i in range(12)
]


def ratio(record):
    return record["usage"]["tokens"] / record["usage"]["quota"]


def walk(records, depth=0):
    if depth < 25:
        return walk(records, depth + 1)
    return [ratio(r) for r in records]


def load_limits(path):
    with open(path) as fh:
        return json.load(fh)


def main():
    try:
        load_limits("/nonexistent/limits.json")
    except FileNotFoundError:
        shares = walk(RECORDS)
    print(shares)


if __name__ == "__main__":
    main()
