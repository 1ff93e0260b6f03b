"""Prometheus for the tests: the chart's alerting rules as a rules file, a real
Prometheus server scraping a test's operator and drivers, and the chart's dashboard
drawn from what it recorded."""
