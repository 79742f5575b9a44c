//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package persist

// mapsSupported is whether mapFile maps files here.
const mapsSupported = false
