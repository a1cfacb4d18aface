"""Installing sro on a cluster: what `sro install` applies (`objects`, with OpenShift's SCCs from
`scc`), `deploy/` written from it (`deploy`), and the `install`/`uninstall` commands (`commands`)."""
