"""A model for the streaming `ltv` job, fitted on the orders the attribution job has
reported so far (the `conversions` topic, the latest version of each order) and published
to `ltv_models`: what `seedance ltv fit --warehouse ... --publish` does from the warehouse,
straight from the topic. The demo runs it before its `ltv` job, so that the job scores
customers instead of only keeping their orders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipelines.codec import table_messages
from pipelines.codec.ltv_models import ModelMessage
from pipelines.kafka.io import read_all
from pipelines.ltv.models_topic import publish_model
from pipelines.ltv.transactions import Transactions
from pipelines.settings.job_config import StreamingJobConfig
from udfs.ltv import fit_model, summaries_from_transactions
from udfs.periods import DAY_MS


def orders_of_topic(bootstrap: str, topic: str,
                    client: dict[str, Any] | None = None) -> Transactions:
    """Each known user's orders on the conversions topic (the latest version of each
    order): customer, day (days since the epoch, with the time of day), revenue."""
    latest: dict[str, dict[str, Any]] = {}
    for _, value in read_all(bootstrap, topic, client=client):
        for row in table_messages.decode(value):
            latest[str(row["order_id"])] = row
    known = [row for row in latest.values() if row["user_id"]]
    return Transactions(np.asarray([str(row["user_id"]) for row in known], dtype=object),
                        np.asarray([int(row["conversion_ts_ms"]) / DAY_MS for row in known],
                                   dtype=np.float64),
                        np.asarray([float(row["revenue"]) for row in known],
                                   dtype=np.float64))


def fit_and_publish(bootstrap: str, config: StreamingJobConfig,
                    client: dict[str, Any] | None = None) -> tuple[ModelMessage, int]:
    """BG/NBD and Gamma-Gamma fitted on the conversions topic's orders up to their last
    day, in periods of ltv.period_days, published with the config's ltv: horizon and
    discount rate; (the message, customers fitted). ValueError when there is nothing to
    fit."""
    orders = orders_of_topic(bootstrap, config.topics.conversions, client)
    if not len(orders.customer):
        raise ValueError(f"no order of a known user on {config.topics.conversions}")
    end = float(np.floor(orders.day.max()))
    period = float(config.ltv.period_days)
    _, summaries = summaries_from_transactions(*orders, end_day=end, period_days=period)
    model = fit_model(summaries, period, end)
    message = ModelMessage.fitted(model, summaries, int(config.ltv.horizon_days),
                                  float(config.ltv.discount_rate))
    publish_model(bootstrap, config.topics.ltv_models, message, client)
    return message, len(summaries)
