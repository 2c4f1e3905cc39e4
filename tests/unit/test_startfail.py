"""A failed deployment's status message, cut to the exception line an operator needs."""

from __future__ import annotations

from types import SimpleNamespace

from service.startfail import exception_line, failed_deployments

RAY_MESSAGE = (
    "The deployment failed to start 3 times in a row. See controller logs for details. Error:\n"
    "\x1b[36mray::ServeReplica:sentiment:SentimentModel.initialize_and_get_metadata()\x1b[39m\n"
    '  File "replica.py", line 1928, in initialize\n'
    "RuntimeError: Traceback (most recent call last):\n"
    '  File "placement.py", line 96, in load_model\n'
    "    return SentimentModel.load(**load, threads=threads)\n"
    "service.modeldir.ModelLoadError: device 'cuda' was asked for but no CUDA GPU is visible\n"
)


def test_the_exception_line_without_module_path_or_colours() -> None:
    assert exception_line(RAY_MESSAGE) == (
        "ModelLoadError: device 'cuda' was asked for but no CUDA GPU is visible"
    )
    assert exception_line("\x1b[31mValueError: bad value: a.b.c\x1b[0m\n\n") == (
        "ValueError: bad value: a.b.c"
    )
    assert exception_line("MemoryError") == "MemoryError"
    assert exception_line("") == ""


def test_only_failed_deployments_are_named() -> None:
    def deployment(status: str, message: str) -> SimpleNamespace:
        return SimpleNamespace(status=status, message=message)

    status = SimpleNamespace(
        applications={
            "sentiment-model": SimpleNamespace(
                deployments={"SentimentModel": deployment("DEPLOY_FAILED", RAY_MESSAGE)}
            ),
            "sentiment": SimpleNamespace(
                deployments={"SentimentIngress": deployment("UPDATING", "waiting")}
            ),
        }
    )
    assert failed_deployments(status) == [
        "SentimentModel: ModelLoadError: device 'cuda' was asked for but no CUDA GPU is visible"
    ]
