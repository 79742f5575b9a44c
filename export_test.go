package fleetwatch

import "os"

// FLEETWATCH_TEST_CACHE_ENCODING, if set, is the Encoding of the Managers of this
// package's tests that set neither Options.Encoding nor Options.Fleet.Codec
// (FLEETWATCH_TEST_CACHE_ENCODING=objects runs them against plain fleets).
func init() {
	if e := os.Getenv("FLEETWATCH_TEST_CACHE_ENCODING"); e != "" {
		defaultEncoding = Encoding(e)
	}
}
