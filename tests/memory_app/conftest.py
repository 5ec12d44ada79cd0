from tests.fakes.fixtures import openai_server  # noqa: F401
