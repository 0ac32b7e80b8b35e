"""GPUs in Kubernetes: a cluster's GPU pods read from the Prometheus that scrapes its
dcgm-exporter and kube-state-metrics, their spend split from each node's price, and idle
allocated GPUs judged per pod (docs/kubernetes.md)."""
