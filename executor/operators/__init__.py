"""Operators of the temporal algebra, one family per module; each is built from its frozen
plan node and handles batches and watermarks (``base.Operator``)."""
