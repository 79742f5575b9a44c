// Package metaenctest makes metadata objects at random for the tests of package metaenc
// and of the packages that write its encoding.
package metaenctest

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/randfill"
)

// Filler returns a randfill.Filler of metav1.PartialObjectMetadata for seed: timestamps
// of whole seconds from 1906 to 2160 (a quarter of them zero), uids in the canonical
// form of a UUID or not, resourceVersions in the canonical form of an integer or not,
// managedFields in two thirds of the objects, and, in those with labels, a label and a
// finalizer made of wellKnown's strings.
func Filler(seed int64, wellKnown []string) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 4).Funcs(
		func(j *metav1.Time, c randfill.Continue) {
			if c.Intn(4) == 0 {
				*j = metav1.Time{}
				return
			}
			*j = metav1.Unix(c.Int63n(8e9)-2e9, 0)
		},
		func(u *types.UID, c randfill.Continue) {
			switch c.Intn(3) {
			case 0:
				*u = types.UID(c.String(40))
			case 1:
				*u = ""
			default:
				*u = types.UID(fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", c.Uint32(), c.Intn(1<<16), c.Intn(1<<16), c.Intn(1<<16), c.Int63n(1<<48)))
			}
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			c.FillNoCustom(m)
			switch c.Intn(3) {
			case 0:
				m.ResourceVersion = strings.TrimLeft(m.ResourceVersion, "0")
			case 1:
				m.ResourceVersion = fmt.Sprint(c.Uint64())
			}
			if c.Intn(3) == 0 {
				m.ManagedFields = nil
			}
			if m.Labels != nil && len(wellKnown) > 0 {
				m.Labels[wellKnown[c.Intn(len(wellKnown))]] = wellKnown[c.Intn(len(wellKnown))]
				m.Finalizers = append(m.Finalizers, wellKnown[c.Intn(len(wellKnown))])
			}
			for i := range m.ManagedFields {
				m.ManagedFields[i].FieldsV1 = metav1.NewFieldsV1(`{"f:metadata":{}}`)
			}
		},
	)
}
