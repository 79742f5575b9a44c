// Command bench measures fleetwatch next to plain client-go on real local clusters.
//
// The driver (the default command) starts N control planes with internal/testenv,
// loads them with realistic pods and configmaps written by server-side apply, and then,
// for each run, launches every contender in a process of its own: this binary again,
// with the contender subcommand. A contender caches the objects, measures itself (time
// from its process start, CPU through getrusage, heap after GC, RSS from /proc) and
// prints its measurements as JSON lines on stdout. The driver reads the apiservers'
// metrics around each contender, drives the writes of the watch phase, and renders the
// medians, spreads and per-run ratios as Markdown. With --many, it also starts 3
// apiservers of its own and measures fleetwatch serve against typed informers at many
// contexts over them (many.go); with --small-pods, clusters of its own holding small
// pods, and the default fleets against typed informers over them (small.go).
//
//	go run ./test/bench --pods 10000 --configmaps 3000 --clusters 3 --runs 3 --out docs/benchmarks.md
//
// See docs/benchmarks.md for what each figure means.
package main

import (
	"fmt"
	"os"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) > 0 && args[0] == "contender" {
		if err := runContender(args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "contender:", err)
			return 1
		}
		return 0
	}
	if err := runDriver(args); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}
