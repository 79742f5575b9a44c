package server

import (
	"cmp"
	"mime"
	"slices"
	"strconv"
	"strings"
)

// format is the representation of a response, negotiated from the Accept header.
type format int

const (
	// formatJSON is the plain Kubernetes JSON of the resource (PodList, Pod, ...).
	formatJSON format = iota
	// formatTable is a meta.k8s.io/v1 Table, as kubectl asks for.
	formatTable
	// formatPartial is meta.k8s.io/v1 PartialObjectMetadata(List), as client-go's
	// metadata client asks for.
	formatPartial
	// formatDiscoveryV2 is the aggregated discovery document
	// apidiscovery.k8s.io/v2 APIGroupDiscoveryList.
	formatDiscoveryV2
)

// Content types of responses.
const (
	contentTypeJSON        = "application/json"
	contentTypeDiscoveryV2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
)

// negotiate picks the most preferred representation of the Accept header that is among
// allowed; JSON is always allowed. list says whether the response is a list (which
// decides between PartialObjectMetadata and PartialObjectMetadataList). It returns false
// if the header accepts nothing the server can produce.
func negotiate(accept string, list bool, allowed ...format) (format, bool) {
	if strings.TrimSpace(accept) == "" {
		return formatJSON, true
	}
	type candidate struct {
		f format
		q float64
	}
	var cands []candidate
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(s, 64); err != nil || q <= 0 {
				continue
			}
		}
		f, ok := mediaFormat(mt, params, list)
		if !ok || (f != formatJSON && !slices.Contains(allowed, f)) {
			continue
		}
		cands = append(cands, candidate{f, q})
	}
	if len(cands) == 0 {
		return 0, false
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.q, a.q) })
	return cands[0].f, true
}

func mediaFormat(mt string, params map[string]string, list bool) (format, bool) {
	switch mt {
	case "*/*", "application/*":
		return formatJSON, true
	case contentTypeJSON:
	default:
		return 0, false
	}
	as, g, v := params["as"], params["g"], params["v"]
	switch {
	case as == "":
		return formatJSON, true
	case as == "Table" && g == "meta.k8s.io" && v == "v1":
		return formatTable, true
	case g == "meta.k8s.io" && v == "v1" && (list && as == "PartialObjectMetadataList" || !list && as == "PartialObjectMetadata"):
		return formatPartial, true
	case as == "APIGroupDiscoveryList" && g == "apidiscovery.k8s.io" && v == "v2":
		return formatDiscoveryV2, true
	}
	return 0, false
}
