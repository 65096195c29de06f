# The test command and a faster one for local work. See README.md.
.PHONY: test test-fast up

test:
	scripts/test.sh full

test-fast:
	scripts/test.sh fast

up:
	cargo run --release -p flotilla -- up
