"""Scenarios on a kind cluster (Docker): the chart and operator as users install them."""
