#!/bin/sh
# A tiny "library" for the example: integer arithmetic in POSIX shell.
add() { echo $(($1 + $2)); }
mul() { echo $(($1 * $2)); }
# Integer division; refuses a zero divisor.
div() {
  if [ "$2" -eq 0 ]; then
    echo "division by zero" >&2
    return 1
  fi
  echo $(($1 / $2))
}
