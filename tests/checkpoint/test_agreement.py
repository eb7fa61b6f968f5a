"""The agreement rule: newest step wins; ties go to the faster tier; holders are listed."""
from trainer.checkpoint.agreement import choose


def inv(**tiers):
    return {t: {"step": s, "bytes": 10, "checksum": f"crc32:{t}{s}"} for t, s in tiers.items()}


def test_memory_on_any_rank_beats_nvme_of_same_or_older_step():
    c = choose([inv(nvme=10), inv(memory=15, nvme=10), {}])
    assert (c.tier, c.step, c.holders, c.src) == ("memory", 15, [1], 1)


def test_tie_prefers_memory_and_lists_all_holders():
    c = choose([inv(memory=20), inv(nvme=20), inv(memory=20)])
    assert (c.tier, c.holders) == ("memory", [0, 2])


def test_newer_nvme_beats_older_memory():
    assert choose([inv(memory=5), inv(nvme=10)]).tier == "nvme"


def test_nothing_anywhere():
    assert choose([{}, {}]) is None
