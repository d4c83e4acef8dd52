"""A shop's web app as a team runs it: Flask, traced by OpenTelemetry's auto-instrumentation
(opentelemetry-instrumentation-flask), exported with the stock OTLP/HTTP exporter. Nothing
of Seedance's is set on a page view: the spans carry what the instrumentation records (the
URL, the referer header it is told to capture). The login puts the user on the request's
span (`enduser.id`) and the checkout records its order (schemas/TELEMETRY.md, section 2).

Runs under .cache/webapp-venv (jobs/setup/webapp-requirements.txt), started by
tests/integration/test_web_app.py:  python tests/web_app.py PORT OTLP_TRACES_URL
"""

import os
import sys

# the referrer is a request header: recorded only when asked for
os.environ.setdefault("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST", "referer")

from flask import Flask, request  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.instrumentation.flask import FlaskInstrumentor  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402

provider = TracerProvider(resource=Resource.create({"service.name": "shop-web"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[2])))
trace.set_tracer_provider(provider)

app = Flask(__name__)
FlaskInstrumentor().instrument_app(app)


@app.before_request
def signed_in_user() -> None:
    user = request.cookies.get("uid")
    if user:
        trace.get_current_span().set_attribute("enduser.id", user)


@app.get("/")
def home() -> str:
    return "home"


@app.get("/p/<item>")
def product(item: str) -> str:
    return f"product {item}"


@app.post("/checkout")
def checkout() -> str:
    span = trace.get_current_span()
    span.set_attribute("order.id", request.form["order"])
    span.set_attribute("order.revenue", float(request.form["amount"]))
    span.set_attribute("order.currency", "USD")
    return "thanks"


@app.get("/health")
def health() -> str:
    return "ok"


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(sys.argv[1]))
