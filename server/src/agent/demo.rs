pub struct DemoAgent;
