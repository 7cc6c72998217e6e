# The two commands a newcomer needs:
#   make run    set everything up, start a single-node broker on 127.0.0.1:9092 with its data in ./data
#   make test   set everything up, run ruff, mypy and the whole test suite
.PHONY: run test setup lint typecheck pytest generate bench clean

run:
	@scripts/setup.sh run
	.venv/bin/tidelog broker --set listeners=PLAINTEXT://127.0.0.1:9092 --set log.dirs=./data

test:
	@scripts/setup.sh test
	$(MAKE) --no-print-directory lint typecheck pytest

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check src tests tools bench examples
	.venv/bin/lint-imports

typecheck:
	.venv/bin/mypy src/tidelog

pytest:
	.venv/bin/python -m pytest --durations=40

generate:
	.venv/bin/python tools/gen_messages.py
	.venv/bin/python tools/gen_coordinator_records.py

clean:
	rm -rf .venv .venv-quix .venv-faust build *.egg-info
