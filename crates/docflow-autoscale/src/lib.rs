//! Scaling arithmetic for docflow's consumer groups, from measurements rather than taste.
//!
//! * [`queueing`]: M/M/1 and M/M/c (Erlang C) waits — what a replica count means for the
//!   time a record waits at a given arrival rate and service rate.
//! * [`keda`]: KEDA's Kafka trigger — its metadata as KEDA parses it, and the metric and
//!   activity it reports for a group's offsets (tested against KEDA's own cases).
//! * [`hpa`]: what the Horizontal Pod Autoscaler does with a metric (desired =
//!   ceil(metric / target) outside a 10 % tolerance, stabilisation windows, rate policies,
//!   min/max).
//! * [`explain`]: a ScaledObject's decision for given offsets and replicas.
//! * [`plan`]: scaling settings (μ, lagThreshold, safe utilisation, min/max replicas,
//!   `max.poll.interval.ms`) derived from measured p50/p99 service times, SLA and budget.
//! * [`plot`]: an SVG line chart of runs over time.
//! * [`simulate`]: the scale-up path over time — arrivals stepping up, a queue, replicas
//!   that serve only after a cold start, decisions every HPA sync period by the rules
//!   above — and the time spent outside the waiting-time SLA.

pub mod explain;
pub mod hpa;
pub mod keda;
pub mod plan;
pub mod plot;
pub mod queueing;
pub mod simulate;
