"""The web console on the ``--metrics-port`` server: every group with its rebalance timeline.

- ``routes``: the HTTP paths (``/``, ``/api/groups``, ``/api/groups/<group>``, ``/api/topics``,
  ``/api/cluster``, ``/api/messages``, ``/api/session``, the actions' POSTs), input checks
  (400/404), the static files;
- ``views``: the JSON, read from the running broker (shards, logs, rebalance history) in
  slices, never through the Kafka protocol; ``history``: each group's recent lag;
- ``cluster_views``: the cluster page's JSON: the nodes, who leads what, every group of the
  cluster with its coordinator (the other nodes' by ListGroups);
- ``messages``: the message browser, a page of a partition read as Fetch reads it;
- ``actions``: reset offsets, delete a group or its offsets, through the coordinator with the
  ACL checks of the APIs they stand for; ``csrf``: the token and origin every POST needs;
- ``static/``: the page itself, plain HTML, CSS and JavaScript (no build step, no CDN); it polls
  the JSON every two seconds (``actions.js`` and ``messages.js`` add the forms, ``cluster.js``
  the cluster page).

The rebalance events themselves are built by ``coordinator.rebalances`` and kept by
``broker.groups.runtime.GroupRuntime.rebalances``.
"""
