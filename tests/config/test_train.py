"""TrainConfig's own rules: --resume-from implies --resume; a pipeline refuses it."""
import pytest

from drmix.config import PipelineBaseConfig, TrainConfig


def test_resume_from_implies_resume():
    assert TrainConfig(resume_from="runs/x/checkpoints/step-4").run.resume is True
    assert TrainConfig().run.resume is False


def test_a_pipeline_refuses_resume_from():
    with pytest.raises(ValueError, match="resumes each of its stages"):
        PipelineBaseConfig(resume_from="runs/x/checkpoints/step-2")
