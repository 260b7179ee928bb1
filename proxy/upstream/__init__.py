"""Everything that opens a socket to a model server: the one send path, pools, windows."""
