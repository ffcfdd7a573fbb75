"""`weir operator`: balancing a cluster by the load its brokers measure, built on the public
reassignment APIs (SEEDS.md §5, "Automatic partition balancing").

- `load`: each broker's per-partition traffic and log sizes, one metrics request per broker per
  look, turned into rates and kept as a window of history;
- `planner`: moves of replicas and leaderships that even out that load, under hard rules (racks,
  tenant pools), with the predicted load per broker before and after;
- `executor`: the moves submitted a few at a time, each started as a slot frees up, so one slow
  move holds up no other; moves touching a broker that left are cancelled.
"""
