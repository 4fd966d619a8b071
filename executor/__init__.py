"""The cqgate back end: the temporal operator algebra that runs continuous queries.

It never imports sqlglot or the dialect; plans arrive as frozen data classes.
"""
