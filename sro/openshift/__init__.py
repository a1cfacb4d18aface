"""OpenShift: the SecurityContextConstraints sro's pods need, the OLM bundle, the ClusterOperator status.

Pure, but for the click command of the bundle: every module here builds objects from sro's own
manifests and reads no node and calls no API (`sro.kube.openshift` does the API side).
"""
