"""The papers drmix cites, read from papers.bib: each BibTeX entry after its one-line reference."""
from drmix.papers import COCO, INFDDS, PAPERS, TDRO, _read_papers


def test_every_paper_is_read_with_its_reference_and_entry():
    assert list(PAPERS) == ["tdro", "coco", "infdds", "drama", "doremi", "groupdro", "multidds", "lora",
                            "matryoshka", "gradcache"]
    assert TDRO.reference == ("Ma et al., Task-level Distributionally Robust Optimization for Large Language "
                              "Model-based Dense Retrieval, AAAI 2025, arXiv:2408.10613")
    assert TDRO.bibtex.startswith("@inproceedings{ma2025tdro,\n    title = {Task-level") and TDRO.bibtex.endswith("}")
    assert COCO.arxiv == "2210.15212" and "% drmix" not in COCO.bibtex
    assert (INFDDS.authors, INFDDS.arxiv, INFDDS.venue) == ("", None, "under review")
    assert INFDDS.citation_name == "Influence Guided Sampling for Domain Adaptation of Text Retrievers (Inf-DDS): under review"
    for paper in PAPERS.values():
        assert paper.bibtex.count("@") == 1 and paper.bibtex.startswith("@") and paper.bibtex.endswith("}")


def test_the_reader_on_a_made_up_file(tmp_path):
    bib = tmp_path / "p.bib"
    bib.write_text("% header\n\n% drmix: a | A et al. | 1234.5 | X 2020 | Title A\n@misc{a1,\n  title = {A}\n}\n\n"
                   "% drmix: b |  |  | draft | Title B\n@misc{b,\n  note = {b}\n}\n", encoding="utf-8")
    papers = _read_papers(bib)
    assert list(papers) == ["a", "b"]
    assert (papers["a"].authors, papers["a"].arxiv, papers["a"].venue, papers["a"].title) == \
        ("A et al.", "1234.5", "X 2020", "Title A")
    assert papers["a"].bibtex == "@misc{a1,\n  title = {A}\n}"
    assert (papers["b"].authors, papers["b"].arxiv, papers["b"].bibtex) == ("", None, "@misc{b,\n  note = {b}\n}")
