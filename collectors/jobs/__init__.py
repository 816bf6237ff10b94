"""The Spark jobs: publish, dispatch, offload and mutation, each throttled by the participant runtime.

Each job is a function ``run_<job>(spark, config) -> summary`` taking a running SparkSession and a frozen
config dataclass, so a test, a notebook or the CLI (``python -m collectors <job> ...``) runs it the same way;
the CLI builds the session (``common.spark_session``: executors get the control plane's address and token
through ``spark.executorEnv.*``). The throttled work runs in the tasks, on each Python worker's participant:

==========  =======================================================  ==============================================
job         work                                                     limiter
==========  =======================================================  ==============================================
publish     records -> sink (files or HTTP), several producers       publish limiters at every level + fairness
            (threads) per task                                       queues (``Producer.acquire``)
dispatch    a backlog (entries = Parquet row groups) read by          ``Dispatcher``: plan_read -> read -> deliver
            subscriptions                                            -> charge (broker, topic, subscription)
offload     ledgers (files) copied hot -> cold, verified             ``OffloadThrottle`` via ``ThrottledReader``
mutation    partition directories created                            KIP-599 ``MutationQuota``, retried
==========  =======================================================  ==============================================

Every job writes its output so that a retried task or a rerun does not duplicate anything (atomic files named
by content, cursors, existence checks), and returns a summary: records (or messages, ledgers, mutations) and
bytes in and out, elapsed time, achieved rates, and what the limiters did.
"""

from .dispatch import DispatchConfig, make_backlog, read_delivered, run_dispatch
from .mutation import MutationConfig, plan_directories, run_mutation
from .offload import OffloadConfig, make_ledgers, run_offload
from .publish import DEMO_TOPICS, PublishConfig, make_input, read_output, run_publish

__all__ = ["PublishConfig", "run_publish", "make_input", "read_output", "DEMO_TOPICS",
           "DispatchConfig", "run_dispatch", "make_backlog", "read_delivered",
           "OffloadConfig", "run_offload", "make_ledgers",
           "MutationConfig", "run_mutation", "plan_directories"]
