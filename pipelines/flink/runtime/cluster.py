"""A Flink MiniCluster that outlives single jobs, for test sessions and repeated local runs.

`StreamExecutionEnvironment.get_execution_environment()` starts (and tears down) a new
MiniCluster for every `execute()`, which costs seconds. This starts one inside the PyFlink
gateway JVM and hands out environments that submit to it over its REST endpoint.
"""

from __future__ import annotations

from pyflink.datastream import StreamExecutionEnvironment
from pyflink.java_gateway import get_gateway

from pipelines.flink.jobs import ATTRIBUTION
from pipelines.settings.job_config import StreamingJobConfig


class LocalFlinkCluster:
    def __init__(self, slots: int = 4) -> None:
        from pipelines.flink.runtime.kafka import prefer_this_python

        prefer_this_python()  # before the gateway JVM starts
        self._gateway = get_gateway()
        jvm = self._gateway.jvm
        conf = jvm.org.apache.flink.configuration.Configuration()
        conf.setString("rest.address", "127.0.0.1")
        conf.setString("rest.bind-address", "127.0.0.1")
        conf.setString("rest.port", "0")
        settings = (jvm.org.apache.flink.runtime.minicluster.MiniClusterConfiguration.Builder()
                    .setConfiguration(conf)
                    .setNumTaskManagers(1)
                    .setNumSlotsPerTaskManager(slots)
                    .build())
        self._cluster = jvm.org.apache.flink.runtime.minicluster.MiniCluster(settings)
        self._cluster.start()
        self.rest_port = int(self._cluster.getRestAddress().get().getPort())

    def environment(self, config: StreamingJobConfig,
                    job_name: str = ATTRIBUTION.flink_name) -> StreamExecutionEnvironment:
        from pipelines.flink.runtime.kafka import flink_configuration
        from pipelines.py4j_routing import route_by_gateway

        jvm = self._gateway.jvm
        settings = flink_configuration(config, job_name=job_name)._j_configuration
        j_env = jvm.org.apache.flink.streaming.api.environment.StreamExecutionEnvironment \
            .createRemoteEnvironment("127.0.0.1", self.rest_port, settings,
                                     self._gateway.new_array(jvm.String, 0))
        env = StreamExecutionEnvironment(j_env)
        route_by_gateway()  # a Spark session in this process keeps its own exception handler
        env.set_parallelism(config.flink.parallelism)
        return env

    def close(self) -> None:
        self._cluster.close()
