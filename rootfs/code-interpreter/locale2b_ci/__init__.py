"""locale2b's Code Interpreter server: the HTTP API that E2B's Code Interpreter
SDKs (`@e2b/code-interpreter`, `e2b-code-interpreter`) call on port 49999 of a
`code-interpreter-v1` sandbox, in front of Jupyter kernels (Python, JavaScript,
bash) driven with jupyter_client. See docs/code-interpreter.md.
"""
