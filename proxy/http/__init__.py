"""What every route shares: keys and access, bodies, the Host guard, disconnects, OpenAPI."""
