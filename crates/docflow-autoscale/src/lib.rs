//! Scaling arithmetic for docflow's consumer groups, from measurements rather than taste.
//!
//! * [`queueing`]: M/M/1 and M/M/c (Erlang C) waits — what a replica count means for the
//!   time a record waits at a given arrival rate and service rate.
//! * [`hpa`]: what KEDA's Kafka scaler reports (total lag, capped at `lagThreshold` per
//!   partition unless idle consumers are allowed; activation) and what the Horizontal Pod
//!   Autoscaler does with it (desired = ceil(metric / target) outside a 10 % tolerance,
//!   stabilisation windows, rate policies, min/max).
//! * [`plan`]: scaling settings (μ, lagThreshold, safe utilisation, min/max replicas,
//!   `max.poll.interval.ms`) derived from measured p50/p99 service times, SLA and budget.
//! * [`simulate`]: the scale-up path over time — arrivals stepping up, a queue, replicas
//!   that serve only after a cold start, decisions every HPA sync period by the rules
//!   above — and the time spent outside the waiting-time SLA.

pub mod hpa;
pub mod plan;
pub mod queueing;
pub mod simulate;
