#!/bin/sh
# The adopter's build of tests/data/adopter/tinyc.c (the `build` of its text mutants): the engine is build/tinyc.
set -e
mkdir -p build
cc -std=c99 -O2 -Wall -o build/tinyc tinyc.c
