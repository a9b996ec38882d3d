import pytest
from llm_server import ScriptedLLM


@pytest.fixture
def llm_server():
    with ScriptedLLM() as server:
        yield server
