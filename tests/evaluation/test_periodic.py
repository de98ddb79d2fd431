"""A sentence-transformers evaluator's scores as metrics.jsonl keys ``<dataset>/<metric>``."""
from drmix.evaluation.periodic import evaluator_scores


class _Evaluator:
    name = "toy"

    def __init__(self, result):
        self.result = result
        self.calls = []

    def __call__(self, model, output_path=None, epoch=-1, steps=-1):
        self.calls.append(steps)
        return self.result


def test_keys_are_split_after_the_evaluator_name_or_at_the_first_underscore():
    ev = _Evaluator({"toy_cosine_ndcg@10": 0.5, "NanoNFCorpus_cosine_mrr@10": 0.25, "plain": 1, "flag": True,
                     "label": "x"})
    assert evaluator_scores(ev, None, 7) == {"toy/cosine_ndcg@10": 0.5, "NanoNFCorpus/cosine_mrr@10": 0.25,
                                             "toy/plain": 1.0}
    assert ev.calls == [7]


def test_an_old_evaluator_returning_one_number():
    assert evaluator_scores(_Evaluator(0.75), None, 1) == {"toy/score": 0.75}
