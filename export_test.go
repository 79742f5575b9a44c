package fleetwatch

import (
	"os"

	"github.com/fleetwatch/fleetwatch/persist"
)

// With FLEETWATCH_TEST_CACHE_ENCODING=compact, the Managers of this package's tests keep
// their objects in the snapshot's encoding (Options.Fleet.Codec = persist.Codec{}).
func init() {
	if os.Getenv("FLEETWATCH_TEST_CACHE_ENCODING") == "compact" {
		defaultFleetCodec = persist.Codec{}
	}
}
