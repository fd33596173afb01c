"""The I/O layer: listeners and connections (net/), the group and transaction runtimes and their
APIs (groups/, txn/), the data plane (data/), security (security/), the cluster and config APIs
(admin_api/), metrics (metrics/) and the console (console/); app.py builds and wires them."""
