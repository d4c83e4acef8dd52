# syntax=docker/dockerfile:1
# The seedance-roi image of docker-compose.yml: Flink 2.2 from the pinned PyFlink package
# (JobManager, TaskManager and the `flink` client, with the same Python as the job's UDFs),
# the Kafka connector jar, and the `seedance` command (loader, dashboard, reconcile).
#   docker build -t seedance-roi:latest .

# --- the connector jar, fetched from Maven Central by the project's own POM, and the job's
# own JVM classes (pipelines/jvm: record framing and event time for the source) ----------
FROM maven:3.9-eclipse-temurin-17 AS jars
WORKDIR /build
COPY jobs/setup/jars.pom.xml ./
RUN mvn --batch-mode --quiet -f jars.pom.xml -Dout=/jars package
COPY pipelines/jvm jvm
RUN mvn --batch-mode --quiet -f jvm/pom.xml -Dout=/jars/flink package

# --- runtime ------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
# Java for Flink; curl and procps for the health checks; gcc builds the OTLP scanner
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless curl procps gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY schemas schemas
COPY udfs udfs
COPY pipelines pipelines
COPY jobs jobs
# the pinned dependencies of pyproject.toml; apache-flink brings Flink's own jars and scripts
# flink-python in Flink's lib/ (as Flink's PyFlink images have it): the embedded Python
# (pemja) is loaded once per TaskManager and serves every job, not once per job
RUN pip install --no-cache-dir . \
 && cp /usr/local/lib/python3.11/site-packages/pyflink/opt/flink-python-*.jar \
       /usr/local/lib/python3.11/site-packages/pyflink/lib/ \
 && useradd --uid 10001 --create-home seedance \
 && mkdir -p /checkpoints /savepoints /var/log/flink \
 && chown seedance /checkpoints /savepoints /var/log/flink

COPY --from=jars /jars/flink/ /opt/seedance/jars/flink/
ENV FLINK_HOME=/usr/local/lib/python3.11/site-packages/pyflink \
    FLINK_LOG_DIR=/var/log/flink \
    SEEDANCE_JARS=/opt/seedance/jars \
    SEEDANCE_HOME=/home/seedance/.seedance \
    PYTHONUNBUFFERED=1
ENV PATH="$FLINK_HOME/bin:$PATH"

USER seedance
EXPOSE 6123 8081 8050
ENTRYPOINT ["/app/jobs/setup/docker-entrypoint.sh"]
CMD ["seedance", "--help"]
