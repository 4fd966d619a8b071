"""Patterns: SASE sequences with negation (seed 004) and MATCH_RECOGNIZE's row patterns, with
their DEFINE conditions."""
