from tests.fakes.fixtures import openai_server  # noqa: F401
from tests.live.server import asgi_server  # noqa: F401
