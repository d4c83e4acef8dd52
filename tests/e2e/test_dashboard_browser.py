"""The finance dashboard in headless Chromium over demo-shaped data, on SQLite and PostgreSQL.

The browser sets the filters through the form as a person would; every figure read off the
page is checked against a SQL query over the same tables written here, independently of
the dashboard's own queries; CSV links are followed; a screenshot is saved. To refresh the
committed one: SEEDANCE_DASHBOARD_SCREENSHOT=docs/dashboard.png, then run this file.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import urllib.request
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from pipelines.store.warehouse import Warehouse, redacted_url
from tests.e2e.sample_warehouse import fill_sample_warehouse

pytestmark = pytest.mark.integration

ROWS_JS = ("return [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
           ".map(tr => [...tr.cells].map(td => td.innerText.trim()))")
PASSWORD = "s3cret-dashboard-pw"
HEADERS_JS = ("return [...document.querySelectorAll(arguments[0] + ' thead th')]"
              ".map(th => th.dataset.col)")


def shown(text: str) -> float | None:
    """A figure as the page prints it -> a number ('1,234.50', '+5.12 %', '—')."""
    if text == "—":
        return None
    if text.endswith("%"):
        return float(text.rstrip("% ").replace(",", "")) / 100
    return float(text.replace(",", ""))


def assert_shown(text: str, expected: float | None, decimals: int = 2) -> None:
    value = shown(text)
    if expected is None:
        assert value is None, text
        return
    assert value is not None, f"{text!r} shown for {expected}"
    # the page rounds to `decimals`; half a unit of the last printed digit is allowed
    assert abs(value - expected) <= 0.5 * 10 ** -decimals + 1e-9, (text, expected)


def table(driver: webdriver.Chrome, name: str) -> dict[str, dict[str, str]]:
    """The table's rows as shown, keyed by the first cell: {key: {column: text}}."""
    columns = driver.execute_script(HEADERS_JS, f"#{name}")
    rows = driver.execute_script(ROWS_JS, f"#{name}")
    if len(rows) == 1 and len(rows[0]) == 1:  # the "no rows" line
        return {}
    return {row[0]: dict(zip(columns, row, strict=True)) for row in rows}


def roi(revenue: float, cost: float) -> float | None:
    """Revenue / cost as the page states it: no ratio on a cost under 1.00."""
    return revenue / cost if cost >= 1.0 else None


def check_cost_rows(shown_rows: dict[str, dict[str, str]],
                    expected: list[tuple[Any, ...]]) -> None:
    """(key, conversions, revenue, ad_spend, compute) from SQL against the shown rows."""
    assert set(shown_rows) == {key or "(none)" for key, *_ in expected}
    for key, conversions, revenue, ad_spend, compute in expected:
        row = shown_rows[key or "(none)"]
        assert_shown(row["conversions"], conversions)
        assert_shown(row["revenue"], revenue)
        assert_shown(row["ad_spend"], ad_spend)
        assert_shown(row["compute_cost"], compute)
        cost = ad_spend + compute
        assert_shown(row["roas"], roi(revenue, ad_spend))
        if abs(ad_spend) < 0.005 and compute > 0:  # email, organic: compute their only cost
            assert (row["roi"], row["margin_roi"]) == ("compute only", "compute only"), row
            continue
        assert_shown(row["roi"], roi(revenue, cost))
        assert_shown(row["margin_roi"], (revenue - cost) / cost if cost >= 1.0 else None)


def rows_of(driver: webdriver.Chrome, name: str) -> list[dict[str, str]]:
    """Every row of the table as shown, {column: text} (no key column needed)."""
    columns = driver.execute_script(HEADERS_JS, f"#{name}")
    rows = driver.execute_script(ROWS_JS, f"#{name}")
    if len(rows) == 1 and len(rows[0]) == 1:  # the "no rows" line
        return []
    return [dict(zip(columns, row, strict=True)) for row in rows]


def interval_text(value: float, low: float, high: float, spec: str = ".2f",
                  scale: float = 1.0, unit: str = "") -> str:
    """How the page writes a value with its interval, e.g. "3.82 [3.41, 4.25]"."""
    return (f"{format(value * scale, spec)}{unit} [{format(low * scale, spec)}, "
            f"{format(high * scale, spec)}]")


def kpi(driver: webdriver.Chrome, name: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, f"#{name} .value").text


def apply_filters(driver: webdriver.Chrome, date_from: str, date_to: str, platform: str,
                  model: str) -> None:
    # a date input's typed format depends on the locale; its value property does not
    driver.execute_script("document.getElementById('f-from').value = arguments[0];"
                          "document.getElementById('f-to').value = arguments[1];",
                          date_from, date_to)
    Select(driver.find_element(By.ID, "f-platform")).select_by_value(platform)
    Select(driver.find_element(By.ID, "f-model")).select_by_value(model)
    driver.find_element(By.ID, "apply").click()
    WebDriverWait(driver, 10).until(lambda d: f"model={model}" in d.current_url)


def fetch_csv(driver: webdriver.Chrome, name: str) -> list[list[str]]:
    href = driver.find_element(By.ID, f"csv-{name}").get_attribute("href")
    with urllib.request.urlopen(href, timeout=10) as response:  # loopback only
        return list(csv.reader(io.StringIO(response.read().decode())))


def test_dashboard_in_a_browser(browser: webdriver.Chrome, warehouse_url: str,
                                serve_dashboard: Callable[[str], str], tmp_path: Path,
                                request: pytest.FixtureRequest) -> None:
    sample = fill_sample_warehouse(warehouse_url, users=900)
    # the test server trusts loopback and ignores a password: one in the URL must still
    # never reach the page
    served_url = warehouse_url.replace("@", f":{PASSWORD}@", 1)
    base = serve_dashboard(served_url)
    wh = Warehouse(warehouse_url)
    q = wh.query
    try:
        # --- ROI, every day, the default model ------------------------------------------
        browser.get(f"{base}/")
        assert browser.current_url.endswith("/roi")
        model = "last_click"
        (revenue, ad_spend, compute, conversions), = q(
            "SELECT SUM(revenue), SUM(ad_spend), SUM(compute_cost), SUM(conversions) "
            "FROM roi_daily WHERE model = ? AND dimension = 'campaign'", (model,))
        assert_shown(kpi(browser, "kpi_revenue"), revenue)
        assert_shown(kpi(browser, "kpi_ad_spend"), ad_spend)
        assert_shown(kpi(browser, "kpi_compute"), compute)
        assert_shown(kpi(browser, "kpi_conversions"), conversions)
        assert_shown(kpi(browser, "kpi_roi"), roi(revenue, ad_spend + compute))
        (unallocated,), = q("SELECT SUM(amount) FROM roi_unallocated WHERE model = ?", (model,))
        assert_shown(kpi(browser, "kpi_unallocated"), unallocated)
        check_cost_rows(table(browser, "roi_by_channel"), q(
            "SELECT key, SUM(conversions), SUM(revenue), SUM(ad_spend), SUM(compute_cost) "
            "FROM roi_daily WHERE model = ? AND dimension = 'channel' GROUP BY key", (model,)))
        assert len(table(browser, "roi_by_day")) == len(sample.days)
        charts = browser.execute_script(
            "return [...document.querySelectorAll('svg.chart')].map(s => "
            "s.getBoundingClientRect().height)")
        assert len(charts) == 3 and min(charts) > 100  # drawn, not just present
        screenshot = save_screenshot(browser, tmp_path / "dashboard.png")
        if os.environ.get("SEEDANCE_DASHBOARD_SCREENSHOT") and "sqlite" in request.node.name:
            shutil.copyfile(screenshot, os.environ["SEEDANCE_DASHBOARD_SCREENSHOT"])

        # --- the same page filtered through the form ---------------------------------------
        first, last, platform, model = sample.days[7], sample.days[20], "meta", "linear"
        apply_filters(browser, first, last, platform, model)
        days = (first, last)
        in_platform = "key IN (SELECT campaign FROM ad_spend WHERE platform = ?)"
        check_cost_rows(table(browser, "roi_by_campaign"), q(
            "SELECT key, SUM(conversions), SUM(revenue), SUM(ad_spend), SUM(compute_cost) "
            "FROM roi_daily WHERE model = ? AND dimension = 'campaign' AND day BETWEEN ? AND ? "
            f"AND {in_platform} GROUP BY key", (model, *days, platform)))
        by_day = q("SELECT day, SUM(conversions), SUM(revenue), SUM(ad_spend), "
                   "SUM(compute_cost) FROM roi_daily WHERE model = ? AND dimension = 'campaign' "
                   f"AND day BETWEEN ? AND ? AND {in_platform} GROUP BY day",
                   (model, *days, platform))
        assert len(by_day) == 14
        check_cost_rows(table(browser, "roi_by_day"), by_day)
        assert "do not apply" in browser.find_element(By.ID, "s-roi_by_channel").text
        exported = fetch_csv(browser, "roi_by_campaign")  # same rows, full precision
        shown_rows = table(browser, "roi_by_campaign")
        assert exported[0][0] == "campaign" and len(exported) - 1 == len(shown_rows)
        for line in exported[1:]:
            assert_shown(shown_rows[line[0]]["revenue"], float(line[3]))

        # --- models side by side: the filters travel with the navigation ----------------------
        browser.find_element(By.LINK_TEXT, "Models").click()
        assert f"platform={platform}" in browser.current_url
        credited = q("SELECT channel, model, SUM(revenue) FROM attribution_credits "
                     "WHERE conversion_date BETWEEN ? AND ? AND campaign IN "
                     "(SELECT campaign FROM ad_spend WHERE platform = ?) GROUP BY channel, model",
                     (*days, platform))
        matrix = table(browser, "models_revenue")
        assert {c for c, _, _ in credited} == set(matrix)
        for channel, credited_model, value in credited:
            assert_shown(matrix[channel][credited_model], value)
        assert len({m for _, m, _ in credited}) == 8  # all eight models, side by side

        # --- lifecycle stages ------------------------------------------------------------------
        browser.find_element(By.LINK_TEXT, "Lifecycle").click()
        check_cost_rows(
            {k: v for k, v in table(browser, "stage_allocation").items()},
            q("SELECT key, SUM(conversions), SUM(revenue), SUM(ad_spend), SUM(compute_cost) "
              "FROM roi_daily WHERE model = ? AND dimension = 'stage' AND day BETWEEN ? AND ? "
              "GROUP BY key", (model, *days)))

        # --- reconciliation drift against the 5 % band ---------------------------------------
        browser.find_element(By.LINK_TEXT, "Reconciliation").click()
        breaches = q("SELECT day, entity, metric, drift FROM reconciliation_daily WHERE "
                     "status = 'breach' AND day BETWEEN ? AND ? AND platform = ?",
                     (*days, platform))
        (compared,), = q("SELECT COUNT(*) FROM reconciliation_daily WHERE day BETWEEN ? AND ? "
                         "AND platform = ?", (*days, platform))
        assert_shown(kpi(browser, "kpi_compared"), compared, 0)
        assert_shown(kpi(browser, "kpi_breaches"), len(breaches), 0)
        rows = browser.execute_script(ROWS_JS, "#recon_breaches")
        if breaches:
            assert sorted((r[0], r[4], r[5]) for r in rows) == sorted(
                (d, e, m) for d, e, m, _ in breaches)
            drift = {(d, e, m): v for d, e, m, v in breaches}
            for r in rows:
                assert_shown(r[9], drift[r[0], r[4], r[5]], 4)
        assert browser.find_element(By.CSS_SELECTOR, "svg.chart").size["height"] > 100

        # --- compute: each workload's own cost and share of idle, by the ROI job's rule ----------
        browser.find_element(By.LINK_TEXT, "Compute").click()
        shown = browser.execute_script(ROWS_JS, "#compute_by_workload")
        workloads = {r[1]: r for r in shown if r[0] == days[0]}
        assert set(workloads) == {"ranker", "batch-embed"}
        own = dict(q("SELECT workload, SUM(cost_usd) FROM gpu_call_costs WHERE "
                     "interval_end_ms / 86400000 = ? GROUP BY workload",
                     (days_since_epoch(days[0]),)))
        assert {r[0] for r in shown} == set(sample.days[7:21])  # the selected days only
        for name, row in workloads.items():
            assert_shown(row[3], own[name], 2)
        (bill,), = q("SELECT (SELECT SUM(cost_usd) FROM gpu_call_costs WHERE interval_end_ms "
                     "/ 86400000 BETWEEN ? AND ?) + (SELECT SUM(cost_usd) FROM gpu_idle_costs "
                     "WHERE interval_end_ms / 86400000 BETWEEN ? AND ?)",
                     [days_since_epoch(d) for d in (*days, *days)])
        assert_shown(kpi(browser, "kpi_gpu_bill"), bill, 2)
        assert browser.execute_script(ROWS_JS, "#compute_unshared")  # the idle L40S days
        assert browser.find_element(By.CSS_SELECTOR, "svg.chart").size["height"] > 100

        # --- alerts, every day and platform ------------------------------------------------------
        browser.get(f"{base}/alerts")
        (opened,), = q("SELECT COUNT(*) FROM alerts o WHERE kind = 'open' AND NOT EXISTS "
                       "(SELECT 1 FROM alerts r WHERE r.kind = 'resolve' AND r.scope = o.scope "
                       "AND r.platform = o.platform AND r.account = o.account AND r.entity = "
                       "o.entity AND r.day = o.day AND r.metric = o.metric AND r.seq = o.seq)")
        (resolved,), = q("SELECT COUNT(*) FROM alerts WHERE kind = 'resolve'")
        assert opened > 0 and resolved > 0  # the sample has both
        assert_shown(kpi(browser, "kpi_open"), opened, 0)
        assert_shown(kpi(browser, "kpi_resolved"), resolved, 0)
        assert len(browser.execute_script(ROWS_JS, "#alerts_open")) == opened
        check_experiments_and_control(browser, base, sample.days, q)
        assert PASSWORD not in browser.page_source
        if warehouse_url.startswith("postgresql"):
            source = browser.find_element(By.CSS_SELECTOR, "header .source").text
            assert source == f"warehouse {redacted_url(served_url)}" and "***" in source
    finally:
        wh.close()


def days_since_epoch(day: str) -> int:
    return (date.fromisoformat(day) - date(1970, 1, 1)).days


def check_experiments_and_control(browser: webdriver.Chrome, base: str, days: list[str],
                                  q: Callable[..., list[tuple[Any, ...]]]) -> None:
    # --- experiments: each one's newest window, checked against the stored results -------
    browser.find_element(By.LINK_TEXT, "Experiments").click()
    shown_rows = {(r["experiment"], r["variant"]): r
                  for r in rows_of(browser, "experiment_strategy")}
    stored = q("SELECT flag_key, variant, window_start, roi, roi_low, roi_high, roi_diff, "
               "diff_low, diff_high, p_value, significant, srm, users FROM experiment_results "
               "WHERE window_end = ?", (days[-1],))
    assert set(shown_rows) == {(r[0], r[1]) for r in stored} and len(stored) == 6
    verdicts = set()
    for (flag, variant, start, roi_, low, high, diff, d_low, d_high, p, significant, srm,
         users) in stored:
        row = shown_rows[flag, variant]
        assert row["window"] == f"{start} .. {days[-1]}"
        assert row["roi"] == interval_text(roi_, low, high)
        assert_shown(row["users"], users, 0)
        assert row["srm"] == ("MISMATCH" if srm else "ok")
        if diff is None:
            assert row["role"] == "control" and row["verdict"] == "control"
            continue
        assert row["roi_diff"] == interval_text(diff, d_low, d_high, "+.2f")
        assert row["verdict"] == ("significant" if significant else "not significant")
        assert_shown(row["p_value"], p, 3)
        verdicts.add(row["verdict"])
    assert verdicts == {"significant", "not significant"}  # the sample has both
    warning = browser.find_element(By.CSS_SELECTOR, "p.warning")
    assert warning.is_displayed() and "Sample ratio mismatch in onboarding-flow" in warning.text
    assert browser.find_element(By.CSS_SELECTOR, "svg.chart").size["height"] > 100

    # --- the control loop: each decision's story, then filtered by status ----------------
    browser.find_element(By.LINK_TEXT, "Control").click()
    decisions = {r["target"]: r for r in rows_of(browser, "control_decisions")}
    assert {t: r["status"] for t, r in decisions.items()} == {
        "dv360-awareness": "executed", "meta-retargeting": "blocked",
        "ranking-pool": "awaiting_approval"}
    assert decisions["meta-retargeting"]["blocked_by"] == "max_change_per_week_percent"
    assert decisions["dv360-awareness"]["outcome"] == (
        "webhook: succeeded after 1 attempt; verified success (+28.0 %)")
    (baseline, observed, change), = q("SELECT baseline, observed, change_percent FROM "
                                      "control_verifications WHERE status = 'success'")
    verification, = rows_of(browser, "control_verifications")
    assert verification["status"] == "success" and verification["target"] == "dv360-awareness"
    assert_shown(verification["baseline"], baseline)
    assert_shown(verification["observed"], observed)
    assert_shown(verification["change"], change / 100, 4)
    assert [r["attempts"] for r in rows_of(browser, "control_actions")] == ["1"]
    Select(browser.find_element(By.ID, "f-status")).select_by_value("blocked")
    browser.find_element(By.ID, "apply").click()
    WebDriverWait(browser, 10).until(lambda d: "status=blocked" in d.current_url)
    assert [r["target"] for r in rows_of(browser, "control_decisions")] == ["meta-retargeting"]
    assert rows_of(browser, "control_actions") == []
    assert fetch_csv(browser, "control_decisions")[1][2] == "meta-retargeting"

    # --- how sure each channel's credit is, for a model and days ---------------------------
    model, first, last = "linear", days[7], days[20]
    browser.get(f"{base}/models?model={model}&from={first}&to={last}")
    expected = q("SELECT channel, share, share_low, share_high FROM credit_intervals WHERE "
                 "model = ? AND period = ?", (model, last))
    shares = {r["channel"]: r for r in rows_of(browser, "credit_intervals")}
    assert set(shares) == {c for c, *_ in expected} and expected
    for channel, share, low, high in expected:
        assert shares[channel]["period"] == last
        assert shares[channel]["share"] == interval_text(share, low, high, ".1f", 100, " %")


def save_screenshot(driver: webdriver.Chrome, path: Path) -> Path:
    """The whole page, not just the first screenful."""
    height, chrome = driver.execute_script(
        "return [document.documentElement.scrollHeight, "
        "window.outerHeight - window.innerHeight]")  # the window is taller than the page area
    driver.set_window_size(1400, min(int(height) + int(chrome), 4000))
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    return path
