"""Reading a Prometheus endpoint in tests: `scrape(url)` parses one scrape of `/metrics` with
prometheus-client's own parser into {(sample name, sorted labels): value}; `total` adds up the
samples of one name whose labels include the ones given.

Test modules import it as `metrics_scrape` (tests/ is on sys.path, see waiting.py).
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, timeout: float = 30) -> Samples:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named `name` with at least these labels (0 when there are none)."""
    wanted = set(labels.items())
    return sum(value for (sample, have), value in samples.items()
               if sample == name and wanted <= set(have))  # fmt: skip
