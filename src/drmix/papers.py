"""The papers drmix implements or builds on, as records a model card cites and a registry spec carries.

A :class:`Paper` is the title, the venue, the arXiv id and the BibTeX of one paper. A strategy's spec
names its paper (``StrategySpec(paper=...)``), so the model card cites what the registry says; features
the card cites without a strategy (COCO pretraining, DRAMA pruning, LoRA, Matryoshka, GradCache) are looked
up by key in :data:`PAPERS`.
"""
from __future__ import annotations

from dataclasses import dataclass


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


TDRO = Paper(
    key="tdro", authors="Ma et al.", arxiv="2408.10613", venue="AAAI 2025",
    title="Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
    bibtex="""@inproceedings{ma2025tdro,
    title = {Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval},
    author = {Ma, Guangyuan and Ma, Yongliang and Wu, Xing and Su, Zhenpeng and Zhou, Ming and Hu, Songlin},
    booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
    year = {2025},
    eprint = {2408.10613},
    archivePrefix = {arXiv}
}""")
COCO = Paper(
    key="coco", authors="Yu et al.", arxiv="2210.15212", venue="EMNLP 2022",
    title="COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and "
          "Distributionally Robust Learning",
    bibtex="""@inproceedings{yu2022cocodr,
    title = {{COCO-DR}: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and Distributionally Robust Learning},
    author = {Yu, Yue and Xiong, Chenyan and Sun, Si and Zhang, Chao and Overwijk, Arnold},
    booktitle = {Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing},
    year = {2022},
    eprint = {2210.15212},
    archivePrefix = {arXiv}
}""")
INFDDS = Paper(
    key="infdds", title="Influence Guided Sampling for Domain Adaptation of Text Retrievers (Inf-DDS)",
    venue="under review",
    bibtex="""@misc{infdds,
    title = {Influence Guided Sampling for Domain Adaptation of Text Retrievers},
    note = {Inf-DDS; under double-blind review}
}""")
DRAMA = Paper(
    key="drama", authors="Ma et al.", arxiv="2502.18460", venue="ACL 2025",
    title="DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers",
    bibtex="""@inproceedings{ma2025drama,
    title = {{DRAMA}: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers},
    author = {Ma, Xueguang and Lin, Xi Victoria and Oguz, Barlas and Lin, Jimmy and Yih, Wen-tau and Chen, Xilun},
    booktitle = {Proceedings of the 63rd Annual Meeting of the Association for Computational Linguistics},
    year = {2025},
    eprint = {2502.18460},
    archivePrefix = {arXiv}
}""")
DOREMI = Paper(
    key="doremi", authors="Xie et al.", arxiv="2305.10429", venue="NeurIPS 2023",
    title="DoReMi: Optimizing Data Mixtures Speeds Up Language Model Pretraining",
    bibtex="""@inproceedings{xie2023doremi,
    title = {{DoReMi}: Optimizing Data Mixtures Speeds Up Language Model Pretraining},
    author = {Xie, Sang Michael and Pham, Hieu and Dong, Xuanyi and Du, Nan and Liu, Hanxiao and Lu, Yifeng and Liang, Percy and Le, Quoc V. and Ma, Tengyu and Yu, Adams Wei},
    booktitle = {Advances in Neural Information Processing Systems},
    year = {2023},
    eprint = {2305.10429},
    archivePrefix = {arXiv}
}""")
GROUPDRO = Paper(
    key="groupdro", authors="Sagawa et al.", arxiv="1911.08731", venue="ICLR 2020",
    title="Distributionally Robust Neural Networks for Group Shifts",
    bibtex="""@inproceedings{sagawa2020groupdro,
    title = {Distributionally Robust Neural Networks for Group Shifts: On the Importance of Regularization for Worst-Case Generalization},
    author = {Sagawa, Shiori and Koh, Pang Wei and Hashimoto, Tatsunori B. and Liang, Percy},
    booktitle = {International Conference on Learning Representations},
    year = {2020},
    eprint = {1911.08731},
    archivePrefix = {arXiv}
}""")
MULTIDDS = Paper(
    key="multidds", authors="Wang et al.", arxiv="2004.06748", venue="ACL 2020",
    title="Balancing Training for Multilingual Neural Machine Translation (MultiDDS)",
    bibtex="""@inproceedings{wang2020multidds,
    title = {Balancing Training for Multilingual Neural Machine Translation},
    author = {Wang, Xinyi and Tsvetkov, Yulia and Neubig, Graham},
    booktitle = {Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics},
    year = {2020},
    eprint = {2004.06748},
    archivePrefix = {arXiv}
}""")
LORA = Paper(
    key="lora", authors="Hu et al.", arxiv="2106.09685", venue="ICLR 2022",
    title="LoRA: Low-Rank Adaptation of Large Language Models",
    bibtex="""@inproceedings{hu2022lora,
    title = {{LoRA}: Low-Rank Adaptation of Large Language Models},
    author = {Hu, Edward J. and Shen, Yelong and Wallis, Phillip and Allen-Zhu, Zeyuan and Li, Yuanzhi and Wang, Shean and Wang, Lu and Chen, Weizhu},
    booktitle = {International Conference on Learning Representations},
    year = {2022},
    eprint = {2106.09685},
    archivePrefix = {arXiv}
}""")
MATRYOSHKA = Paper(
    key="matryoshka", authors="Kusupati et al.", arxiv="2205.13147", venue="NeurIPS 2022",
    title="Matryoshka Representation Learning",
    bibtex="""@inproceedings{kusupati2022matryoshka,
    title = {Matryoshka Representation Learning},
    author = {Kusupati, Aditya and Bhatt, Gantavya and Rege, Aniket and Wallingford, Matthew and Sinha, Aditya and Ramanujan, Vivek and Howard-Snyder, William and Chen, Kaifeng and Kakade, Sham and Jain, Prateek and Farhadi, Ali},
    booktitle = {Advances in Neural Information Processing Systems},
    year = {2022},
    eprint = {2205.13147},
    archivePrefix = {arXiv}
}""")
GRADCACHE = Paper(
    key="gradcache", authors="Gao et al.", arxiv="2101.06983", venue="RepL4NLP 2021",
    title="Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup",
    bibtex="""@inproceedings{gao2021gradcache,
    title = {Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup},
    author = {Gao, Luyu and Zhang, Yunyi and Han, Jiawei and Callan, Jamie},
    booktitle = {Proceedings of the 6th Workshop on Representation Learning for NLP},
    year = {2021},
    eprint = {2101.06983},
    archivePrefix = {arXiv}
}""")

#: every paper above by key (the card looks up the papers it cites by key)
PAPERS: dict[str, Paper] = {p.key: p for p in (TDRO, COCO, INFDDS, DRAMA, DOREMI, GROUPDRO, MULTIDDS, LORA,
                                                MATRYOSHKA, GRADCACHE)}
