"""Which session a request belongs to: named, fingerprinted, or joined by what it holds."""
