"""`sro report` and the utilisation line of `sro status`: GPU readings over time from Prometheus.

Why its own package: it reads the cluster's Prometheus, not the node or the Kubernetes API, and its
drawing library (matplotlib) is an optional extra (`sro[report]`) that the node image never carries.
Pure parts (`promql`, `shaping`) are apart from the HTTP client (`prometheus`) and the drawing.
"""
