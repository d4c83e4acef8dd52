"""Channel rules: a visit's source, medium and campaign (udfs/traffic/landing.py) to a
marketing channel, by an ordered list of rules of which the first that matches wins.

The shipped rule set (jobs/config/channel_rules.yaml) is web analytics' default channel
grouping (GA4's, support.google.com/analytics/answer/9756891), with the channel names in
this project's snake_case (`paid_search`, `organic_social`, ...). Teams edit a copy and
point `journey.channel_rules` at it. A rule file:

    lists:                      # named lists of sites, matched by domain label
      search_sites: [google, bing, duckduckgo]
    rules:                      # first match wins
      - channel: paid_search
        all:                    # every condition holds ...
          - {field: source, in_list: search_sites}
          - {field: medium, matches: '^(.*cp.*|ppc|retargeting|paid.*)$'}
      - channel: organic_search
        any:                    # ... or at least one does (both keys: both hold)
          - {field: source, in_list: search_sites}
          - {field: medium, equals: [organic]}
    fallback: unassigned        # no rule matched

Fields: source, medium, campaign, evidence (utm, referrer, direct, click_id:<name>).
Tests: `equals` (a list), `contains` (a list of substrings), `ends_with` (a list),
`matches` (a regular expression, searched), `in_list` (a named list: the value is one of
its sites or ends with "." + one, e.g. "l.facebook.com" for "facebook", or has it as a
label, "google.co.uk" for "google"). Every comparison ignores case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from udfs.config_files import read_config_text
from udfs.traffic.landing import TrafficSource

FIELDS = ("source", "medium", "campaign", "evidence")
TESTS = ("equals", "contains", "ends_with", "matches", "in_list")


class ChannelRulesError(ValueError):
    """A rule file that cannot be used: names the file, line and field."""


@dataclass(frozen=True)
class Condition:
    field: str
    test: str
    argument: Any  # a tuple of lower-case strings, a compiled pattern or a list's name
    holds: Callable[[str], bool]


@dataclass(frozen=True)
class ChannelRule:
    channel: str
    name: str  # what `seedance inspect` shows as the rule that decided
    all_of: tuple[Condition, ...]
    any_of: tuple[Condition, ...]

    def matches(self, traffic: TrafficSource) -> bool:
        values = {"source": traffic.source, "medium": traffic.medium,
                  "campaign": traffic.campaign, "evidence": traffic.evidence}
        if not all(condition.holds(values[condition.field].lower())
                   for condition in self.all_of):
            return False
        return not self.any_of or any(condition.holds(values[condition.field].lower())
                                      for condition in self.any_of)


@dataclass(frozen=True)
class Classification:
    channel: str
    rule: str  # the deciding rule's name, or "fallback"


@dataclass(frozen=True)
class ChannelRules:
    rules: tuple[ChannelRule, ...]
    fallback: str
    origin: str  # the file they came from

    def classify(self, traffic: TrafficSource) -> Classification:
        for rule in self.rules:
            if rule.matches(traffic):
                return Classification(rule.channel, rule.name)
        return Classification(self.fallback, "fallback")


def in_site_list(value: str, sites: Sequence[str]) -> bool:
    """Whether a source (a host or platform name) is one of the sites, a subdomain of one,
    or has one as a domain label ("google.co.uk" for "google")."""
    dotted = f".{value}."
    return any(f".{site}." in dotted for site in sites)


def load_channel_rules(path: Path) -> ChannelRules:
    """The rules of a file, or a ChannelRulesError naming the file, line and field."""
    text = read_config_text(path, ChannelRulesError, "channel rules")
    return parse_channel_rules(text, str(path))


def parse_channel_rules(text: str, origin: str = "<rules>") -> ChannelRules:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as error:
        raise ChannelRulesError(f"{origin}: not valid YAML: {error}") from None
    if not isinstance(root, yaml.MappingNode):
        raise ChannelRulesError(f"{origin}: the top level must be a mapping with `rules`")
    top = _mapping(root, origin, "")
    lists = _site_lists(top.get("lists"), origin)
    rules_node = top.get("rules")
    if not isinstance(rules_node, yaml.SequenceNode) or not rules_node.value:
        raise _error(origin, rules_node or root, "rules", "a list of at least one rule")
    rules = tuple(_rule(node, origin, f"rules[{index}]", lists)
                  for index, node in enumerate(rules_node.value))
    fallback = _text(top["fallback"], origin, "fallback") if "fallback" in top \
        else "unassigned"
    unknown = set(top) - {"lists", "rules", "fallback"}
    if unknown:
        name = sorted(unknown)[0]
        raise _error(origin, top[name], name, "not a key of a rule file (lists, rules, "
                     "fallback)")
    return ChannelRules(rules, fallback, origin)


def _rule(node: yaml.Node, origin: str, where: str,
          lists: Mapping[str, tuple[str, ...]]) -> ChannelRule:
    if not isinstance(node, yaml.MappingNode):
        raise _error(origin, node, where, "a mapping with `channel` and `all` or `any`")
    keys = _mapping(node, origin, where)
    unknown = set(keys) - {"channel", "name", "all", "any"}
    if unknown:
        name = sorted(unknown)[0]
        raise _error(origin, keys[name], f"{where}.{name}",
                     "not a key of a rule (channel, name, all, any)")
    if "channel" not in keys:
        raise _error(origin, node, f"{where}.channel", "missing")
    channel = _text(keys["channel"], origin, f"{where}.channel")
    all_of = _conditions(keys.get("all"), origin, f"{where}.all", lists)
    any_of = _conditions(keys.get("any"), origin, f"{where}.any", lists)
    if not all_of and not any_of:
        raise _error(origin, node, where, "needs conditions under `all` or `any`")
    name = _text(keys["name"], origin, f"{where}.name") if "name" in keys else channel
    return ChannelRule(channel, name, all_of, any_of)


def _conditions(node: yaml.Node | None, origin: str, where: str,
                lists: Mapping[str, tuple[str, ...]]) -> tuple[Condition, ...]:
    if node is None:
        return ()
    if not isinstance(node, yaml.SequenceNode):
        raise _error(origin, node, where, "a list of conditions")
    return tuple(_condition(item, origin, f"{where}[{index}]", lists)
                 for index, item in enumerate(node.value))


def _condition(node: yaml.Node, origin: str, where: str,
               lists: Mapping[str, tuple[str, ...]]) -> Condition:
    if not isinstance(node, yaml.MappingNode):
        raise _error(origin, node, where, "a mapping like {field: medium, equals: [cpc]}")
    keys = _mapping(node, origin, where)
    if "field" not in keys:
        raise _error(origin, node, f"{where}.field", f"missing (one of {', '.join(FIELDS)})")
    field = _text(keys["field"], origin, f"{where}.field")
    if field not in FIELDS:
        raise _error(origin, keys["field"], f"{where}.field",
                     f"{field!r} is not one of {', '.join(FIELDS)}")
    tests = [key for key in keys if key != "field"]
    if len(tests) != 1 or tests[0] not in TESTS:
        raise _error(origin, node, where, f"needs exactly one test of {', '.join(TESTS)} "
                     f"(got {', '.join(tests) or 'none'})")
    test, value = tests[0], keys[tests[0]]
    at = f"{where}.{test}"
    if test == "matches":
        pattern = _text(value, origin, at)
        try:
            compiled = re.compile(pattern, re.IGNORECASE)
        except re.error as error:
            raise _error(origin, value, at, f"not a regular expression: {error}") from None
        return Condition(field, test, compiled, lambda text: compiled.search(text) is not None)
    if test == "in_list":
        list_name = _text(value, origin, at)
        if list_name not in lists:
            raise _error(origin, value, at, f"no list named {list_name!r} under `lists`"
                         f" (there are: {', '.join(sorted(lists)) or 'none'})")
        sites = lists[list_name]
        return Condition(field, test, list_name, lambda text: in_site_list(text, sites))
    words = _words(value, origin, at)
    if test == "equals":
        return Condition(field, test, words, lambda text: text in words)
    if test == "contains":
        return Condition(field, test, words, lambda text: any(w in text for w in words))
    return Condition(field, test, words, lambda text: text.endswith(words))


def _site_lists(node: yaml.Node | None, origin: str) -> dict[str, tuple[str, ...]]:
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise _error(origin, node, "lists", "a mapping of list names to lists of sites")
    return {name: _words(value, origin, f"lists.{name}")
            for name, value in _mapping(node, origin, "lists").items()}


def _mapping(node: yaml.MappingNode, origin: str, where: str) -> dict[str, yaml.Node]:
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise _error(origin, key, where or "top level", "keys must be plain words")
        out[str(key.value)] = value
    return out


def _text(node: yaml.Node, origin: str, where: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
        raise _error(origin, node, where, "a non-empty text")
    return str(node.value).strip()


def _words(node: yaml.Node, origin: str, where: str) -> tuple[str, ...]:
    if isinstance(node, yaml.ScalarNode):
        return (_text(node, origin, where).lower(),)
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise _error(origin, node, where, "a non-empty list of texts")
    return tuple(_text(item, origin, f"{where}[{index}]").lower()
                 for index, item in enumerate(node.value))


def _error(origin: str, node: yaml.Node, where: str, problem: str) -> ChannelRulesError:
    line = node.start_mark.line + 1 if node is not None else "?"
    return ChannelRulesError(f"{origin}, line {line}: {where}: {problem}")
