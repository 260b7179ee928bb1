"""The compile stage: the token budget from the window, the view from the strategies, and
the token counts (estimated, calibrated per session) they are made with."""
