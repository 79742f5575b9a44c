package mcprovider

// DefaultTypedObjects is the default of Options.TypedObjects. Kept objects cost their
// typed heap: 1,024 of make bench's ConfigMaps take about 2.5 MB, of its large pods 11
// MB, which a controller's heap per object carries (docs/benchmarks.md, "mcprovider's
// memo of typed objects").
const DefaultTypedObjects = 1024
