"""Exact search with torch equals FAISS's flat inner-product index; no faiss import for flat indexes."""
import subprocess
import sys

import numpy as np
import torch

from drmix.retrieval.exact import TorchFlatIndex, topk_inner_product


def test_torch_exact_search_equals_faiss_flat_on_random_data():
    import faiss

    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((5000, 48)).astype(np.float32)
    queries = rng.standard_normal((300, 48)).astype(np.float32)
    flat = faiss.IndexFlatIP(48)
    flat.add(corpus)
    f_scores, f_rows = flat.search(queries, 20)
    index = TorchFlatIndex(corpus, device="cpu")
    t_scores, t_rows = index.search(queries, 20)
    np.testing.assert_array_equal(t_rows, f_rows)
    np.testing.assert_allclose(t_scores, f_scores, rtol=1e-5, atol=1e-4)
    # chunking the corpus (as for corpora larger than one GEMM) changes nothing
    s, r = topk_inner_product(torch.from_numpy(queries), torch.from_numpy(corpus), 20, chunk=777)
    np.testing.assert_array_equal(r.numpy(), f_rows)
    assert index.ntotal == 5000 and index.d == 48
    np.testing.assert_array_equal(index.reconstruct(7), corpus[7])


def test_ties_go_to_the_lower_row_and_k_is_capped():
    corpus = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.0]])
    s, r = topk_inner_product(torch.tensor([[1.0, 0.0]]), corpus, 10, chunk=1)
    assert r.tolist() == [[0, 2, 3, 1]] and s.tolist() == [[1.0, 1.0, 0.5, 0.0]]


def test_flat_index_build_save_load_search_never_imports_faiss(tmp_path):
    code = f"""
import sys, numpy as np
from drmix.retrieval.index import DenseIndex
v = np.eye(3, dtype=np.float32)
DenseIndex.build(v, ["a", "b", "c"]).save({str(tmp_path / 'i')!r})
idx = DenseIndex.load({str(tmp_path / 'i')!r})
scores, ids = idx.search(np.array([[0, 1, 0]], dtype=np.float32), 2)
assert ids == [["b", "a"]], ids
assert "faiss" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True)
