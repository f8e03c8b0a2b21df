module github.com/meshnode/health/healthprom

go 1.26.0

require (
	github.com/meshnode/health v0.0.0-20261204231336-8e93ce56088f
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Only the branch main lands in this repository; nothing is tagged. So
// health is required at a pseudo-version of a commit on main (its committer
// time in UTC and its hash; TestHealthVersionIsOnThisBranch checks both).
// A go.mod cannot name the commit that holds it, so that commit is older
// than this one: a user takes both modules at @main, and Go builds with the
// higher of the two health versions. This replace applies only to this
// module's own builds and tests, which use the health package of the same
// checkout, so that a change to Status and its collector land as one.
replace github.com/meshnode/health => ../
