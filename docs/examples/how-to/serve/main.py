# main.py: the rollout server as an ASGI app (`uvicorn main:app`)
from my_rollout import EchoAgent, ExactMatch

from osmosis_run import AgentWorkflowConfig, ConcurrencyConfig, LocalBackend
from osmosis_run.server import create_rollout_server

workflow_config = AgentWorkflowConfig(name="echo", concurrency=ConcurrencyConfig(max_concurrent=8))

backend = LocalBackend(workflow=EchoAgent, workflow_config=workflow_config, grader=ExactMatch)
app = create_rollout_server(backend=backend)
