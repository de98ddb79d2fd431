"""The papers drmix implements or builds on, as records a model card cites and a registry spec carries.

A :class:`Paper` is the title, the venue, the arXiv id and the BibTeX of one paper (its entry in ``papers.bib``
beside this module). A strategy's spec
names its paper (``StrategySpec(paper=...)``), so the model card cites what the registry says; features
the card cites without a strategy (COCO pretraining, DRAMA pruning, LoRA, Matryoshka, GradCache) are looked
up by key in :data:`PAPERS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paper:
    """One paper.

    Attributes:
        key: short name the card and the docs use (``tdro``, ``coco``, ...).
        title: the paper's title.
        authors: first author "et al." as the card's one-line reference shows it ("" when anonymous).
        venue: where and when it appeared ("AAAI 2025"; "under review").
        arxiv: the arXiv id, or None.
        bibtex: the BibTeX entry of the card's Citation section.
    """

    key: str
    title: str
    venue: str
    bibtex: str
    authors: str = ""
    arxiv: str | None = None

    @property
    def reference(self) -> str:
        """One line: ``Authors, Title, Venue, arXiv:ID`` (the parts that exist)."""
        return ", ".join(p for p in (self.authors, self.title, self.venue,
                                     f"arXiv:{self.arxiv}" if self.arxiv else "") if p)

    @property
    def citation_name(self) -> str:
        """The heading of the card's citation: ``Authors: Title`` (``Title: Venue`` for an anonymous paper)."""
        return f"{self.authors}: {self.title}" if self.authors else f"{self.title}: {self.venue}"


def _read_papers(path: Path) -> dict[str, Paper]:
    """The papers of ``papers.bib``: each BibTeX entry after its ``% drmix: KEY | AUTHORS | ARXIV | VENUE | TITLE``
    line."""
    papers: dict[str, Paper] = {}
    for chunk in path.read_text(encoding="utf-8").split("\n% drmix: ")[1:]:
        head, _, entry = chunk.partition("\n")
        key, authors, arxiv, venue, title = (f.strip() for f in head.split(" | "))
        papers[key] = Paper(key=key, title=title, venue=venue, bibtex=entry.strip(), authors=authors,
                            arxiv=arxiv or None)
    return papers


#: every paper by key, in the order of ``papers.bib`` (the card looks up the papers it cites by key)
PAPERS: dict[str, Paper] = _read_papers(Path(__file__).with_name("papers.bib"))
(TDRO, COCO, INFDDS, DRAMA, DOREMI, GROUPDRO, MULTIDDS, LORA, MATRYOSHKA, GRADCACHE) = (
    PAPERS[k] for k in ("tdro", "coco", "infdds", "drama", "doremi", "groupdro", "multidds", "lora", "matryoshka",
                        "gradcache"))
