"""The daily reconciliation as an Apache Beam batch pipeline.

ingest (warehouse reads: our results, the staged billing data, the alert history) ->
transform (facts per key, join, drift, daily totals, alert decisions; the arithmetic is
udfs.reconcile.drift) -> write (each day's rows and alert events in one transaction). `reconcile`
is the transform alone, so tests feed it in-memory collections. DirectRunner by default;
any runner through the config's beam.runner and beam.options.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.reconcile.store import AlertSinks, ReconcileStore, alert_row
from udfs.periods import days_between, local_day, split_by_day, utc_bounds_ms
from udfs.reconcile import (
    BREACH,
    Amount,
    Comparison,
    Key,
    RateTable,
    Rule,
    compare,
    decide,
    state_of,
    total,
)

log = logging.getLogger("seedance.reconcile")
NS = "reconcile"  # Beam metrics namespace
CAMPAIGN_METRICS = ("spend", "conversions", "revenue")


class Fact(NamedTuple):
    """One amount on one side of a key, with where a billing amount came from."""

    side: str  # ours | theirs
    amount: Amount
    source: str = ""
    reported_at: str = ""


@dataclass(frozen=True)
class Settings:
    first: str
    last: str
    rules: Mapping[str, Rule]
    rates: RateTable = RateTable()
    reporting_currency: str = ""
    time_zones: Mapping[tuple[str, str], str] = field(default_factory=dict)  # config's
    resource_map: Mapping[str, str] = field(default_factory=dict)  # empty: identity
    charge_categories: tuple[str, ...] = ("Usage", "Credit", "Adjustment")
    top_n: int = 5
    run_id: str = ""
    raised_at: str = ""
    sinks: AlertSinks = AlertSinks()


class Inputs(NamedTuple):
    """The pipeline's sources, as PCollections of warehouse rows (see ReconcileStore)."""

    spend: beam.PCollection  # our_spend
    credits: beam.PCollection  # our_credits
    gpu_costs: beam.PCollection  # our_gpu_costs
    campaign_accounts: beam.PCollection
    report_zones: beam.PCollection
    their_ads: beam.PCollection
    their_cloud: beam.PCollection
    alert_events: beam.PCollection


class Outputs(NamedTuple):
    comparisons: beam.PCollection  # Comparison, every key and every daily total
    alerts: beam.PCollection  # rows for the alerts table (new events only)
    by_day: beam.PCollection  # (day, [('row', Comparison) | ('alert', row)])


# --- facts per key -------------------------------------------------------------------

def spend_facts(row: tuple[Any, ...], first: str, last: str) -> Iterator[tuple[tuple, Fact]]:
    platform, account, campaign, day, amount, currency = row
    if first <= day <= last:
        yield (tuple(Key("campaign", platform, account, campaign, day, "spend")),
               Fact("ours", Amount(float(amount), currency)))


class CreditFacts(beam.DoFn):
    """Our credits on the account's local day, under the campaign's (platform, account)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.unmapped = Metrics.counter(NS, "credits_without_account")
        self.ambiguous = Metrics.counter(NS, "credits_of_ambiguous_campaigns")

    def process(self, row: tuple[Any, ...], accounts: Mapping[str, list[tuple[str, str]]],
                zones: Mapping[tuple[str, str], str]) -> Iterator[tuple[tuple, Fact]]:
        campaign, order_id, ts_ms, credit, revenue, currency = row
        owners = sorted(set(accounts.get(campaign, ())))
        if len(owners) != 1:
            # no spend row and no report row names the campaign ('(unattributed)' among
            # them), or two accounts do: its credits cannot be put on one account
            (self.unmapped if not owners else self.ambiguous).inc()
            return
        platform, account = owners[0]
        zone = self.settings.time_zones.get((platform, account)) \
            or zones.get((platform, account), "")
        day = local_day(int(ts_ms), zone)
        if not self.settings.first <= day <= self.settings.last:
            return
        base = Key("campaign", platform, account, campaign, day, "conversions")
        yield tuple(base), Fact("ours", Amount(float(credit), "", order_id))
        yield (tuple(base._replace(metric="revenue")),
               Fact("ours", Amount(float(revenue), currency, order_id)))


def gpu_facts(row: tuple[Any, ...], settings: Settings) -> Iterator[tuple[tuple, Fact]]:
    gpu, start_ms, end_ms, cost_usd, workload = row
    resource = settings.resource_map.get(gpu, gpu)
    for day, share in split_by_day(int(start_ms), int(end_ms), float(cost_usd)):
        if settings.first <= day <= settings.last:
            yield (tuple(Key("gpu", "", "", resource, day, "compute_cost")),
                   Fact("ours", Amount(share, "USD", workload)))


def their_ad_facts(row: tuple[Any, ...]) -> Iterator[tuple[tuple, Fact]]:
    (platform, account, campaign, day, currency, spend, conversions, revenue, basis, source,
     reported_at) = row
    if basis == "interaction" and conversions is not None:
        # ours fall on the order's day; such rows differ by construction (see the summary)
        Metrics.counter(NS, "report_rows_by_interaction_date").inc()
    for metric, value in zip(CAMPAIGN_METRICS, (spend, conversions, revenue), strict=True):
        if value is not None:
            yield (tuple(Key("campaign", platform, account, campaign, day, metric)),
                   Fact("theirs", Amount(float(value), "" if metric == "conversions"
                                         else currency), source, reported_at))


def ad_coverage(row: tuple[Any, ...]) -> Iterator[tuple[tuple[str, ...], bool]]:
    """(platform, account, day, metric) the reports speak for: a campaign missing from a
    covered account-day is one the platform says did nothing."""
    platform, account, _campaign, day, _cur, spend, conversions, revenue = row[:8]
    for metric, value in zip(CAMPAIGN_METRICS, (spend, conversions, revenue), strict=True):
        if value is not None:
            yield (platform, account, day, metric), True


def their_cloud_facts(row: tuple[Any, ...], categories: tuple[str, ...],
                      known: Mapping[str, bool]) -> Iterator[tuple[tuple, Fact]]:
    resource, day, currency, cost, source, reported_at, category = row
    if category in categories and resource in known:
        yield (tuple(Key("gpu", "", "", resource, day, "compute_cost")),
               Fact("theirs", Amount(float(cost), currency), source, reported_at))


# --- comparisons ---------------------------------------------------------------------

def compare_key(element: tuple[tuple, Iterable[Fact]], settings: Settings,
                covered_ads: Mapping[tuple[str, ...], bool],
                covered_days: Mapping[str, bool]) -> Comparison:
    key = Key(*element[0])
    facts = list(element[1])
    theirs = [f for f in facts if f.side == "theirs"]
    if key.scope == "gpu":
        covered = key.day in covered_days
    else:
        covered = (key.platform, key.account, key.day, key.metric) in covered_ads
    sources = sorted({f.source for f in theirs})
    source = sources[0] + (f" (+{len(sources) - 1} more)" if len(sources) > 1 else "") \
        if sources else ""
    return compare(key, [f.amount for f in facts if f.side == "ours"],
                   [f.amount for f in theirs], settings.rules[key.metric], settings.rates,
                   covered=covered, top_n=settings.top_n, source=source,
                   reported_at=max((f.reported_at for f in theirs), default=""))


def daily_total(element: tuple[tuple[str, str], Iterable[Comparison]],
                settings: Settings) -> Comparison:
    (day, metric), comparisons = element
    return total(day, metric, comparisons, settings.rules[metric], settings.rates,
                 settings.reporting_currency, settings.top_n)


class Decide(beam.DoFn):
    """Per key: the row for reconciliation_daily, and a new alert event if the breach
    state changed against the stored alert history."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.breaches = Metrics.counter(NS, "breaches")
        self.opened = Metrics.counter(NS, "alerts_opened")
        self.resolved = Metrics.counter(NS, "alerts_resolved")

    def process(self, element: tuple[tuple, dict[str, list[Any]]]) -> Iterator[Any]:
        key = Key(*element[0])
        comparisons, events = element[1]["comparison"], element[1]["events"]
        comparison = comparisons[0] if comparisons else None
        if comparison is not None:
            if comparison.status == BREACH:
                self.breaches.inc()
            yield beam.pvalue.TaggedOutput("rows", (key.day, ("row", comparison)))
        transition = decide(state_of(events), comparison)
        if transition is not None:
            (self.opened if transition.kind == "open" else self.resolved).inc()
            row = alert_row(key, transition, comparison, self.settings.run_id,
                            self.settings.raised_at, self.settings.sinks)
            yield beam.pvalue.TaggedOutput("alerts", row)
            yield beam.pvalue.TaggedOutput("rows", (key.day, ("alert", row)))


def reconcile(inputs: Inputs, settings: Settings) -> Outputs:
    """The transform: in-memory or warehouse-backed inputs alike."""
    p = inputs.spend.pipeline
    s = settings
    accounts = (inputs.campaign_accounts
                | "AccountOfCampaign" >> beam.Map(lambda r: (r[0], (r[1], r[2])))
                | "AccountsPerCampaign" >> beam.GroupByKey()
                | "AccountList" >> beam.MapTuple(lambda c, owners: (c, list(owners))))
    zones = (inputs.report_zones
             | "ZoneKey" >> beam.Map(lambda r: ((r[0], r[1]), r[2]))
             | "OneZonePerAccount" >> beam.CombinePerKey(max))
    ours_gpu = inputs.gpu_costs | "GpuFacts" >> beam.FlatMap(gpu_facts, s)
    known = ((ours_gpu | "OurResources" >> beam.Map(lambda kv: (kv[0][3], True)))
             if not s.resource_map else
             (p | "MappedResources" >> beam.Create(
                 [(r, True) for r in sorted(set(s.resource_map.values()))])))
    known = known | "DistinctResources" >> beam.CombinePerKey(lambda flags: True)
    facts = (
        (inputs.spend | "SpendFacts" >> beam.FlatMap(spend_facts, s.first, s.last),
         inputs.credits | "CreditFacts" >> beam.ParDo(
             CreditFacts(s), beam.pvalue.AsDict(accounts), beam.pvalue.AsDict(zones)),
         ours_gpu,
         inputs.their_ads | "TheirAdFacts" >> beam.FlatMap(their_ad_facts),
         inputs.their_cloud | "TheirCloudFacts" >> beam.FlatMap(
             their_cloud_facts, s.charge_categories, beam.pvalue.AsDict(known)))
        | "AllFacts" >> beam.Flatten())
    covered_ads = (inputs.their_ads | "AdCoverage" >> beam.FlatMap(ad_coverage)
                   | "DistinctAdCoverage" >> beam.CombinePerKey(lambda flags: True))
    covered_days = (inputs.their_cloud
                    | "CloudDays" >> beam.Map(lambda r: (r[1], True))
                    | "DistinctCloudDays" >> beam.CombinePerKey(lambda flags: True))
    per_key = (facts
               | "FactsPerKey" >> beam.GroupByKey()
               | "Compare" >> beam.Map(compare_key, s, beam.pvalue.AsDict(covered_ads),
                                       beam.pvalue.AsDict(covered_days)))
    totals = (per_key
              | "ByDayAndMetric" >> beam.Map(lambda c: ((c.key.day, c.key.metric), c))
              | "KeysPerDay" >> beam.GroupByKey()
              | "DailyTotal" >> beam.Map(daily_total, s))
    comparisons = (per_key, totals) | "KeysAndTotals" >> beam.Flatten()
    events = (inputs.alert_events
              | "EventKey" >> beam.Map(lambda r: (tuple(r[:6]), (r[6], int(r[7])))))
    decided = ({"comparison": comparisons | "ComparisonKey" >> beam.Map(
                    lambda c: (tuple(c.key), c)),
                "events": events}
               | "WithAlertHistory" >> beam.CoGroupByKey()
               | "Decide" >> beam.ParDo(Decide(s)).with_outputs("rows", "alerts"))
    every_day = p | "EveryDay" >> beam.Create([(d, ("day", None))
                                               for d in days_between(s.first, s.last)])
    by_day = ((decided.rows, every_day) | "RowsAndDays" >> beam.Flatten()
              | "PerDay" >> beam.GroupByKey()
              | "DayItems" >> beam.MapTuple(
                  lambda day, items: (day, [i for i in items if i[0] != "day"])))
    return Outputs(comparisons, decided.alerts, by_day)


# --- the warehouse-backed job --------------------------------------------------------

class Query(beam.DoFn):
    """Reads one ReconcileStore query (on the worker, so any runner can read)."""

    def __init__(self, url: str, method: str, *args: Any) -> None:
        self.url, self.method, self.args = url, method, args

    def process(self, _: object) -> Iterator[tuple[Any, ...]]:
        store = ReconcileStore(self.url)
        try:
            yield from getattr(store, self.method)(*self.args)
        finally:
            store.close()


class WriteDays(beam.DoFn):
    """Replaces each day's rows and adds its alert events in one transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.rows = Metrics.counter(NS, "rows_written")
        self.store: ReconcileStore | None = None

    def setup(self) -> None:
        self.store = ReconcileStore(self.url)

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()

    def process(self, element: tuple[str, list[tuple[str, Any]]]) -> Iterator[str]:
        assert self.store is not None
        day, items = element
        comparisons = [payload for kind, payload in items if kind == "row"]
        alerts = [payload for kind, payload in items if kind == "alert"]
        written, added = self.store.write_day(day, comparisons, alerts)
        self.rows.inc(written)
        breaches = sum(c.status == BREACH for c in comparisons)
        opened = sum(a[1] == "open" for a in alerts)
        log.info("%s: %d rows, %d breaches, %d alerts opened, %d resolved", day, written,
                 breaches, opened, len(alerts) - opened)
        yield day


def warehouse_inputs(p: beam.Pipeline, url: str, settings: Settings, model: str) -> Inputs:
    first, last = settings.first, settings.last
    start_ms, end_ms = utc_bounds_ms(first, last)

    def read(name: str, method: str, *args: Any) -> beam.PCollection:
        return (p | f"Start{name}" >> beam.Create([None])
                | f"Read{name}" >> beam.ParDo(Query(url, method, *args)))

    return Inputs(
        spend=read("OurSpend", "our_spend", first, last),
        credits=read("OurCredits", "our_credits", first, last, model),
        gpu_costs=read("OurGpuCosts", "our_gpu_costs", start_ms, end_ms),
        campaign_accounts=read("CampaignAccounts", "campaign_accounts"),
        report_zones=read("ReportZones", "report_time_zones"),
        their_ads=read("TheirAds", "their_ad_rows", first, last),
        their_cloud=read("TheirCloud", "their_cloud_costs", first, last,
                         settings.charge_categories),
        alert_events=read("AlertHistory", "alert_events", first, last))


def run_pipeline(url: str, settings: Settings, model: str, runner: str = "DirectRunner",
                 options: Iterable[str] = ()) -> dict[str, int]:
    """Run the job against the warehouse at `url`; returns its counters."""
    pipeline_options = PipelineOptions([f"--runner={runner}", *options])
    pipeline = beam.Pipeline(options=pipeline_options)
    outputs = reconcile(warehouse_inputs(pipeline, url, settings, model), settings)
    _ = outputs.by_day | "WriteDays" >> beam.ParDo(WriteDays(url))
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query()["counters"]
    return {c.key.metric.name: int(c.committed or c.attempted or 0) for c in counters
            if c.key.metric.namespace == NS}
