"""The cluster controller, shaped as Kafka's ZooKeeper-era controller:

- `controller`: election, the event handlers, the public requests (`KafkaController`);
- `events`: one frozen dataclass per event (`ControllerEvent`);
- `event_manager`: the queue and the one thread that handles it (`ControllerEventManager`);
- `context`: live brokers, assignments, leaders and ISRs, states (`ControllerContext`);
- `states`, `state_machines`: partition and replica states and their transitions
  (`PartitionStateMachine`, `ReplicaStateMachine`);
- `batch`: one batch of requests per event, channels to brokers (`ControllerBrokerRequestBatch`,
  `ControllerChannelManager`);
- `leadership`: elections, leader balance, AlterPartition, controlled shutdown (in Kafka's
  `KafkaController`);
- `reassignment`: partition moves (Kafka's `onPartitionReassignment`);
- `zk`: the controller's fenced reads and writes of znodes (`KafkaZkClient`).

Every module logs as `weir.cluster.controller`, the one name operators filter the controller's
log on: state changes at INFO, faults at WARNING and ERROR.
"""

from weir.cluster.controller.controller import Controller
from weir.cluster.controller.events import ElectionType, IsrChange, IsrResult
from weir.cluster.controller.leadership import LeaderBalance
from weir.cluster.controller.zk import ControllerMovedError

__all__ = [
    "Controller",
    "ControllerMovedError",
    "ElectionType",
    "IsrChange",
    "IsrResult",
    "LeaderBalance",
]
