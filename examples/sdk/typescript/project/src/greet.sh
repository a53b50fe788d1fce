#!/bin/sh
# The "project" under test: prints a greeting for its first argument.
name=${1:-world}
echo "Hello, $name!"
