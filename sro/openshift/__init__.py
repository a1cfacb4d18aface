"""OpenShift, built on `sro.install`: the OLM bundle, SCC admission checks, the ClusterOperator status.

Pure, but for the click command of the bundle: every module here builds objects from sro's own
manifests and reads no node and calls no API (`sro.kube.openshift` does the API side). The SCCs
themselves are part of what `sro install --platform openshift` applies: `sro.install.scc`.
"""
