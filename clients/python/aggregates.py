"""Example user-defined aggregates for ``cqgate serve --aggregate``: seed 000's summary
({min, max, avg, med}) and a plain median.

    cqgate serve --aggregate summary=aggregates:Summary --aggregate median=aggregates:Median

(with this directory on PYTHONPATH). A class has ``add(value)``, ``result()`` and a
``returns`` SQL type; one instance holds the state of one group over one interval.
"""
import statistics


class Median:
    returns = "DOUBLE"

    def __init__(self):
        self.values = []

    def add(self, value):
        self.values.append(value)

    def result(self):
        return float(statistics.median(self.values)) if self.values else None


class Summary:
    returns = "STRUCT(min DOUBLE, max DOUBLE, avg DOUBLE, med DOUBLE)"

    def __init__(self):
        self.values = []

    def add(self, value):
        self.values.append(value)

    def result(self):
        v = self.values
        if not v:
            return None
        return {"min": min(v), "max": max(v), "avg": sum(v) / len(v),
                "med": float(statistics.median(v))}
