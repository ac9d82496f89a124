"""What every cluster target needs, whatever its scheduler: Swarm's and Slurm's, and
the next one's (Kubernetes).

A cluster target plans against nodes that declare their GPUs and prices, submits each
task to the cluster's scheduler and follows it there. These modules are the parts of that
which do not depend on the scheduler, so a target writes only its calls, its states and
its words; the lowest first:

- :mod:`.resources`: the default memory of a task (2 GiB per CPU, for every target), how
  many tasks of some requirements a node holds at once, and the share of the node's
  price one of them pays (also the local target's, for a fan-out's tasks);
- :mod:`.pricing`: a node's GPU model from what it declares (a label, a GRES type),
  through the one GPU table, and its price (declared, else the catalog's);
- :mod:`.following`: the follow loop, pending (why, in a
  :class:`~nodus_cli.targets.base.Pending`) then running (started, output) then its end;
- :mod:`.logfiles`: a task's output followed from a file its node writes to a shared
  file system (Slurm's single jobs and arrays);
- :mod:`.refusal`: a request no node can meet, refused before anything is submitted, in
  the same words on every cluster (the nearest fit, each node left out and why);
- :mod:`.settling`: a run whose supervisor died, its jobs' ends written onto the records
  and a fan-out stage's items summed, alike on every cluster that owns its jobs.

It imports no target (``tests/test_layers.py``): targets import it.
"""
